//! The state machine, persisted in sled (trees `sm` and `snapshot`).
//!
//! Memory holds the whole [`SetState`] (it is small: tens of bytes a
//! section); sled holds the same records, one key each. Applying a batch of
//! entries writes the records the commands changed *and* the last applied
//! log id in one atomic sled batch, so after a crash the state on disk
//! always matches the log id it claims (openraft then re-applies the rest).
//!
//! Errors here are storage failures, never business outcomes: a refused
//! command is an [`crate::types::Rejection`] in the response. A storage
//! error is returned to openraft, which stops the node: carrying on after a
//! failed write could let this replica's state diverge from the others'.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};
use seqsvr_core::codec;
use serde::{Deserialize, Serialize};

use crate::disk::{Disk, MAX_VALUE};
use crate::metrics::Stages;
use crate::state::{Dirty, SetState};
use crate::types::{
    Entry, LogId, Response, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use seqsvr_store_core::counters::Counters;
use seqsvr_store_core::ids::IdSpaces;

const APPLIED: &[u8] = b"applied";
const MEMBERSHIP: &[u8] = b"membership";
const SET: &[u8] = b"set";
const VERSION: &[u8] = b"route_version";
const LEASE: &[u8] = b"lease";
const PLACEMENT: &[u8] = b"placement";
const DIRECTORY: &[u8] = b"directory";
const SECTION: u8 = b's';
const ALLOC: u8 = b'a';
/// One id namespace per record: `i` + its name.
const ID_SPACE: u8 = b'i';
/// One counter declaration per record: `n` + its name.
const COUNTER: u8 = b'n';

const SNAP_META: &[u8] = b"meta";
const SNAP_CHUNK: u8 = b'c';

/// What the state machine holds in memory.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Applied {
    /// The set's state.
    pub state: SetState,
    /// The last log id applied.
    pub last_applied: Option<LogId>,
    /// The last membership applied.
    pub membership: StoredMembership,
}

/// The sled-backed state machine of one replica. Clones share state.
#[derive(Clone)]
pub struct StateMachine {
    /// The replica's database (for syncs).
    disk: Disk,
    /// State-machine records.
    sm: sled::Tree,
    /// The current snapshot (metadata and chunks).
    snap: sled::Tree,
    /// The in-memory copy, read by the store service after a linearizable
    /// barrier.
    applied: Arc<RwLock<Applied>>,
    /// Commands applied since start (a metric).
    commands: Arc<AtomicU64>,
    /// Time spent applying entries (state logic plus the sled batch), ns.
    apply_nanos: Arc<AtomicU64>,
    /// Snapshots built since start (to make snapshot ids unique).
    builds: Arc<AtomicU64>,
    /// The last snapshot this replica built (for the admin plane).
    last_build: Arc<Mutex<SnapshotBuilt>>,
    /// Where the time of applies and snapshot builds is recorded.
    stages: Arc<Stages>,
}

/// A snapshot this replica built, as the admin plane reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotBuilt {
    /// Snapshots built since start; 0: none yet.
    pub count: u64,
    /// The last log index it covers.
    pub last_log_index: u64,
    /// Its encoded size.
    pub bytes: u64,
    /// Time to encode it and store it durably.
    pub took: Duration,
}

fn sm_read_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_state_machine(&e).into()
}

fn sm_write_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_state_machine(&e).into()
}

fn snap_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_snapshot(None, &e).into()
}

fn section_key(s: u32) -> [u8; 5] {
    let mut k = [SECTION; 5];
    k[1..].copy_from_slice(&s.to_be_bytes());
    k
}

fn alloc_key(id: &str) -> Vec<u8> {
    let mut k = vec![ALLOC];
    k.extend_from_slice(id.as_bytes());
    k
}

fn id_space_key(name: &str) -> Vec<u8> {
    let mut k = vec![ID_SPACE];
    k.extend_from_slice(name.as_bytes());
    k
}

fn counter_key(name: &[u8]) -> Vec<u8> {
    let mut k = vec![COUNTER];
    k.extend_from_slice(name);
    k
}

fn enc<T: Serialize>(v: &T) -> Result<Vec<u8>, StorageError> {
    codec::encode(v).map_err(sm_write_err)
}

impl StateMachine {
    /// Opens the state machine in `disk`, loading what it holds.
    pub fn open(disk: &Disk) -> Result<Self, StorageError> {
        let sm = disk.tree("sm").map_err(sm_read_err)?;
        let snap = disk.tree("snapshot").map_err(sm_read_err)?;
        let applied = load(&sm)?;
        Ok(Self {
            disk: disk.clone(),
            sm,
            snap,
            applied: Arc::new(RwLock::new(applied)),
            commands: Arc::default(),
            apply_nanos: Arc::default(),
            builds: Arc::default(),
            last_build: Arc::default(),
            stages: Stages::unregistered(),
        })
    }

    /// The same state machine (clones share it), recording the time of its
    /// applies and snapshot builds in `stages`.
    pub fn with_stages(mut self, stages: Arc<Stages>) -> Self {
        self.stages = stages;
        self
    }

    /// The last snapshot this replica built since start.
    pub fn last_build(&self) -> SnapshotBuilt {
        *self.last_build.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read access to the applied state.
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Commands applied since start.
    pub fn commands_applied(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }

    /// Time spent applying entries since start.
    pub fn apply_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.apply_nanos.load(Ordering::Relaxed))
    }

    fn write_all_records(batch: &mut sled::Batch, a: &Applied) -> Result<(), StorageError> {
        batch.insert(APPLIED, enc(&a.last_applied)?);
        batch.insert(MEMBERSHIP, enc(&a.membership)?);
        batch.insert(VERSION, enc(&a.state.route_version)?);
        batch.insert(LEASE, enc(&a.state.lease)?);
        batch.insert(PLACEMENT, enc(&a.state.placement)?);
        batch.insert(DIRECTORY, enc(&a.state.directory)?);
        if let Some(set) = &a.state.set {
            batch.insert(SET, enc(set)?);
        }
        for (i, r) in a.state.sections.iter().enumerate() {
            batch.insert(&section_key(i as u32), enc(r)?);
        }
        for (id, rec) in &a.state.allocs {
            batch.insert(alloc_key(id), enc(rec)?);
        }
        for (name, space) in &a.state.ids.spaces {
            batch.insert(id_space_key(name), enc(space)?);
        }
        for (name, rec) in &a.state.counters.by_name {
            batch.insert(counter_key(name), enc(rec)?);
        }
        Ok(())
    }

    fn write_dirty(
        batch: &mut sled::Batch,
        a: &Applied,
        dirty: &[Dirty],
    ) -> Result<(), StorageError> {
        for d in dirty {
            match d {
                Dirty::All => {
                    if let Some(set) = &a.state.set {
                        batch.insert(SET, enc(set)?);
                    }
                    for (i, r) in a.state.sections.iter().enumerate() {
                        batch.insert(&section_key(i as u32), enc(r)?);
                    }
                }
                Dirty::RouteVersion => batch.insert(VERSION, enc(&a.state.route_version)?),
                Dirty::Lease => batch.insert(LEASE, enc(&a.state.lease)?),
                Dirty::Section(s) => {
                    batch.insert(&section_key(*s), enc(&a.state.sections[*s as usize])?)
                }
                Dirty::Alloc(id) => match a.state.allocs.get(id) {
                    Some(rec) => batch.insert(alloc_key(id), enc(rec)?),
                    // Retired.
                    None => batch.remove(alloc_key(id)),
                },
                Dirty::Placement => batch.insert(PLACEMENT, enc(&a.state.placement)?),
                Dirty::Directory => batch.insert(DIRECTORY, enc(&a.state.directory)?),
                Dirty::IdSpace(name) => match a.state.ids.spaces.get(name) {
                    Some(space) => batch.insert(id_space_key(name), enc(space)?),
                    None => batch.remove(id_space_key(name)),
                },
                Dirty::Counter(name) => match a.state.counters.by_name.get(name) {
                    Some(rec) => batch.insert(counter_key(name), enc(rec)?),
                    None => batch.remove(counter_key(name)),
                },
            }
        }
        Ok(())
    }

    /// Stores `snapshot` as the current one, in chunks below sled's blob
    /// threshold, and makes it durable before openraft may purge the log
    /// it replaces.
    fn save_snapshot(&self, meta: &SnapshotMeta, data: &[u8]) -> Result<(), StorageError> {
        let mut batch = sled::Batch::default();
        for kv in self.snap.iter() {
            batch.remove(kv.map_err(snap_err)?.0);
        }
        batch.insert(SNAP_META, codec::encode(meta).map_err(snap_err)?);
        for (i, chunk) in data.chunks(MAX_VALUE / 2).enumerate() {
            let mut k = vec![SNAP_CHUNK];
            k.extend_from_slice(&(i as u32).to_be_bytes());
            batch.insert(k, chunk);
        }
        self.snap.apply_batch(batch).map_err(snap_err)?;
        self.disk.sync().map_err(snap_err)
    }

    fn snapshot_of(a: &Applied, id: String) -> Result<(SnapshotMeta, Vec<u8>), StorageError> {
        // The id namespaces and counters follow the state (which does not
        // encode them): a snapshot written before they existed holds the
        // state alone, or the state and the id namespaces.
        let data = codec::encode(&(&a.state, &a.state.ids, &a.state.counters)).map_err(snap_err)?;
        let meta = SnapshotMeta {
            last_log_id: a.last_applied,
            last_membership: a.membership.clone(),
            snapshot_id: id,
        };
        Ok((meta, data))
    }
}

fn dec<T: serde::de::DeserializeOwned>(what: &str, v: &[u8]) -> Result<T, StorageError> {
    codec::decode(what, v).map_err(sm_read_err)
}

/// A snapshot's state: the state, its id namespaces and counters, or
/// (written before counters existed) the state and its id namespaces, or
/// (before id namespaces) the state alone.
pub fn decode_snapshot(data: &[u8]) -> Result<SetState, StorageError> {
    if let Ok((mut state, ids, counters)) =
        codec::decode::<(SetState, IdSpaces, Counters)>("snapshot", data)
    {
        state.ids = ids;
        state.counters = counters;
        return Ok(state);
    }
    match codec::decode::<(SetState, IdSpaces)>("snapshot", data) {
        Ok((mut state, ids)) => {
            state.ids = ids;
            Ok(state)
        }
        Err(_) => codec::decode("snapshot", data).map_err(snap_err),
    }
}

/// Loads the records written by [`StateMachine`] into memory.
fn load(sm: &sled::Tree) -> Result<Applied, StorageError> {
    let mut a = Applied::default();
    let mut sections = Vec::new();
    for kv in sm.iter() {
        let (k, v) = kv.map_err(sm_read_err)?;
        match &k[..] {
            APPLIED => a.last_applied = dec("applied", &v)?,
            MEMBERSHIP => a.membership = dec("membership", &v)?,
            SET => a.state.set = Some(dec("set", &v)?),
            VERSION => a.state.route_version = dec("route version", &v)?,
            LEASE => a.state.lease = dec("lease", &v)?,
            PLACEMENT => a.state.placement = dec("placement", &v)?,
            DIRECTORY => a.state.directory = dec("directory", &v)?,
            [SECTION, rest @ ..] if rest.len() == 4 => sections.push(dec("section", &v)?),
            [ALLOC, id @ ..] => {
                let id = String::from_utf8_lossy(id).into_owned();
                a.state.allocs.insert(id, dec("alloc", &v)?);
            }
            [ID_SPACE, name @ ..] => {
                let name = String::from_utf8_lossy(name).into_owned();
                a.state.ids.spaces.insert(name, dec("id namespace", &v)?);
            }
            [COUNTER, name @ ..] => {
                let rec = dec("counter", &v)?;
                a.state.counters.by_name.insert(name.to_vec(), rec);
            }
            _ => {}
        }
    }
    // Keys are big-endian, so sled returned sections in order.
    a.state.sections = sections;
    a.state.rebuild_derived();
    Ok(a)
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let a = self.read();
        Ok((a.last_applied, a.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let start = std::time::Instant::now();
        let mut guard = self.applied.write().unwrap_or_else(|e| e.into_inner());
        let a = &mut *guard;
        let mut dirty = Vec::new();
        let mut responses = Vec::new();
        let mut n = 0;
        for entry in entries {
            a.last_applied = Some(entry.log_id);
            let mut resp = Response::default();
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(req) => {
                    n += req.commands.len() as u64;
                    for cmd in &req.commands {
                        resp.outcomes.push(a.state.apply(cmd, &mut dirty));
                    }
                }
                EntryPayload::Membership(m) => {
                    a.membership = StoredMembership::new(Some(entry.log_id), m);
                }
            }
            responses.push(resp);
        }
        // The changed records and the applied log id, atomically.
        let mut batch = sled::Batch::default();
        Self::write_dirty(&mut batch, a, &dirty)?;
        batch.insert(APPLIED, enc(&a.last_applied)?);
        batch.insert(MEMBERSHIP, enc(&a.membership)?);
        self.sm.apply_batch(batch).map_err(sm_write_err)?;
        self.commands.fetch_add(n, Ordering::Relaxed);
        let took = start.elapsed();
        self.apply_nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        self.stages.apply.observe(took.as_secs_f64());
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let mut state = decode_snapshot(&data)?;
        state.rebuild_derived();
        let new = Applied {
            state,
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        let mut guard = self.applied.write().unwrap_or_else(|e| e.into_inner());
        // Replace every record in one atomic batch.
        let mut batch = sled::Batch::default();
        for kv in self.sm.iter() {
            batch.remove(kv.map_err(sm_write_err)?.0);
        }
        Self::write_all_records(&mut batch, &new)?;
        self.sm.apply_batch(batch).map_err(sm_write_err)?;
        *guard = new;
        drop(guard);
        self.save_snapshot(meta, &data)
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let Some(meta) = self.snap.get(SNAP_META).map_err(snap_err)? else {
            return Ok(None);
        };
        let meta: SnapshotMeta = codec::decode("snapshot meta", &meta).map_err(snap_err)?;
        let mut data = Vec::new();
        for kv in self.snap.scan_prefix([SNAP_CHUNK]) {
            data.extend_from_slice(&kv.map_err(snap_err)?.1);
        }
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let start = Instant::now();
        let n = self.builds.fetch_add(1, Ordering::Relaxed);
        let (meta, data) = {
            let a = self.read();
            let id = match a.last_applied {
                Some(l) => format!("{}-{}-{n}", l.leader_id, l.index),
                None => format!("none-{n}"),
            };
            Self::snapshot_of(&a, id)?
        };
        // Durable before openraft purges the log it covers; the sync also
        // makes every state-machine record up to here durable.
        self.save_snapshot(&meta, &data)?;
        let took = start.elapsed();
        self.stages.snapshot.observe(took.as_secs_f64());
        {
            let mut last = self.last_build.lock().unwrap_or_else(|e| e.into_inner());
            *last = SnapshotBuilt {
                count: last.count + 1,
                last_log_index: meta.last_log_id.map_or(0, |l| l.index),
                bytes: data.len() as u64,
                took,
            };
        }
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}
